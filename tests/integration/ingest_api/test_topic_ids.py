"""Topic IDs over HTTP: shown by the topic and metadata routes, and a topic deleted and created again — through
the node or by another process — is never read, written or committed by the node as the old one."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import httpx
import pyarrow as pa

from logstore.config import load_config
from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import ProducerBatch
from tests.support.inodes import recreate_reusing_log_inode
from tests.support.server import Server

StartServer = Callable[..., Server]
KAFKA_UUID = re.compile(r"[A-Za-z0-9_-]{22}")


def _produce(c: httpx.Client, topic: str, values: list[str]) -> httpx.Response:
    return c.post(f"/v1/topics/{topic}/records", json={"records": [{"value": v, "partition": 0} for v in values]})


def _values(c: httpx.Client, topic: str, offset: int) -> list[str]:
    r = c.get(f"/v1/topics/{topic}/partitions/0/records", params={"offset": offset})
    assert r.status_code == 200, r.text
    return [rec["value"] for rec in r.json()["records"]]


def _store(srv: Server) -> LogStore:
    """The server's root opened by this process: another process, as `logstore --root` would be."""
    return LogStore(load_config(environ={}, path=None, overrides={"logstore.root": str(srv.root)}))


def test_a_topic_s_id_is_shown_and_a_topic_created_again_has_a_new_one(server: StartServer) -> None:
    with server().client() as c:
        created = c.post("/v1/topics", json={"name": "t", "partitions": 2}).json()
        first = created["topic_id"]
        assert KAFKA_UUID.fullmatch(first)
        assert c.get("/v1/topics/t").json()["topic_id"] == first
        assert c.get("/v1/metadata").json()["topics"][0]["topic_id"] == first
        assert c.delete("/v1/topics/t").status_code == 204
        second = c.post("/v1/topics", json={"name": "t", "partitions": 2}).json()["topic_id"]
        assert KAFKA_UUID.fullmatch(second) and second != first
        assert c.get("/v1/metadata").json()["topics"][0]["topic_id"] == second


def test_a_warm_node_reader_reads_a_topic_created_again_with_the_old_log_inode(server: StartServer) -> None:
    srv = server()
    other = _store(srv)
    with srv.client() as c:
        for attempt in range(5):
            if attempt:
                c.delete("/v1/topics/t")
            assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
            for i in range(12):
                assert _produce(c, "t", [f"old-{i}-{j}" for j in range(3)]).status_code == 200
            assert _values(c, "t", 36) == []  # the node's reader of the topic is warm, at its end
            path = other.catalog.topic_path("t")
            if recreate_reusing_log_inode(path, lambda: other.delete_topic("t"), lambda: other.create_topic("t", 1)):
                break
        else:
            raise AssertionError("the file system did not hand the old _delta_log inode back")
        for values in ([b"new-0", b"new-1"], [b"new-2"]):
            other.append("t", [ProducerBatch(input_table(pa.array([0] * len(values), pa.int32()), values))])
        r = c.get("/v1/topics/t/partitions/0/records", params={"offset": 36})
        assert r.status_code == 416 and r.json()["error_code"] == "OFFSET_OUT_OF_RANGE"
        assert _values(c, "t", 0) == ["new-0", "new-1", "new-2"]
        assert c.get("/v1/topics/t").json()["topic_id"] == other.catalog.topic_id("t")


def test_the_node_writes_a_topic_another_process_created_again_from_offset_0(server: StartServer) -> None:
    srv = server(**{"linger.ms": 1})
    other = _store(srv)
    with srv.client() as c:
        assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
        for i in range(5):
            assert _produce(c, "t", [f"old-{i}"]).status_code == 200  # the node's pipeline of the topic is open
        other.delete_topic("t")
        other.create_topic("t", 1)
        deadline = time.monotonic() + 10
        while True:
            r = _produce(c, "t", ["new-0"])
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            assert r.status_code == 503 and r.json()["error_code"] == "INCONSISTENT_TOPIC_ID", r.text
        assert r.status_code == 200, r.text
        assert r.json()["offsets"] == [{"partition": 0, "offset": 0}]
        assert _values(c, "t", 0) == ["new-0"]


def test_an_acks_1_answer_after_another_process_created_the_topic_again_is_the_new_topic_s(
    server: StartServer,
) -> None:
    # A long linger: an acks=1 answer comes from the write-ahead log long before any commit could notice.
    srv = server(**{"linger.ms": 60000, "batch.size": 100_000_000})
    other = _store(srv)
    with srv.client() as c:
        assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
        r = c.post("/v1/topics/t/records", params={"acks": "1"}, json={"records": [{"value": "old", "partition": 0}]})
        assert r.status_code == 200, r.text  # the node's pipeline of the topic is open
        other.delete_topic("t")
        other.create_topic("t", 1)
        body = {"records": [{"value": "new-0", "partition": 0}]}
        deadline = time.monotonic() + 10
        while True:
            r = c.post("/v1/topics/t/records", params={"acks": "1"}, json=body)
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            assert r.status_code == 503 and r.json()["error_code"] == "INCONSISTENT_TOPIC_ID", r.text
        # Was: 200 with offset 1 of the deleted topic, a promise the new topic never kept.
        assert r.status_code == 200 and r.json()["offsets"] == [{"partition": 0, "offset": 0}], r.text
    assert srv.stop() in (0, -15)  # drains (uvicorn re-raises SIGTERM after its graceful shutdown)
    assert other.fetch("t", 0, 0).records["value"].to_pylist() == [b"new-0"]


def test_deleting_a_topic_deletes_its_group_offsets(server: StartServer) -> None:
    with server().client() as c:
        for name in ("t", "kept"):
            assert c.post("/v1/topics", json={"name": name, "partitions": 2}).status_code == 201
            assert _produce(c, name, ["a", "b"]).status_code == 200
            assert c.post("/v1/groups/g/offsets", json={"topic": name, "partitions": {"0": 2}}).status_code == 200
        assert {t["topic"] for t in c.get("/v1/groups/g").json()["topics"]} == {"t", "kept"}
        assert c.delete("/v1/topics/t").status_code == 204
        assert [t["topic"] for t in c.get("/v1/groups/g").json()["topics"]] == ["kept"]
        assert c.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
        assert [t["topic"] for t in c.get("/v1/groups/g").json()["topics"]] == ["kept"]
