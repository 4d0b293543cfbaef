"""acks=1 offsets are final: where a record is answered to be is where it stays, beside other writers.

The ingest node promises acks=1 offsets only while it holds the topic's writer
lock and only behind batches that are committed or in its write-ahead log. A
cooperative writer on the same host (the Spark sink's ``TopicWriter(join=True)``,
``logstore produce --root``) announces that it waits; the node commits every
batch it promised and hands the lock over. The kill -9 loops in
``tests/system/ingest_api/test_api_crash.py`` cover crashes.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable

import httpx
import pyarrow as pa

from logstore.config import load_config
from logstore.log.catalog import Catalog
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.structs import AppendResult, ProducerBatch
from tests.support.helpers import assert_gap_free
from tests.support.server import LOGSTORE, Server


def _produce_acks_1(url: str, name: str, batches: int, acked: dict[bytes, tuple[int, int]], errors: list[str]) -> None:
    with httpx.Client(base_url=url, timeout=30) as c:
        for b in range(batches):
            values = [f"{name}-{b}-{i}" for i in range(5)]
            body = {"records": [{"key": v, "value": v} for v in values]}
            r = c.post("/v1/topics/t/records", params={"acks": "1"}, json=body)
            if r.status_code != 200:
                errors.append(r.text)
                return
            for v, o in zip(values, r.json()["offsets"], strict=True):
                acked[v.encode()] = (o["partition"], o["offset"])


def test_promises_stay_exact_while_cooperative_writers_commit(server: Callable[..., Server]) -> None:
    srv = server(**{"linger.ms": 2})
    with srv.client() as c:
        assert c.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[str] = []
    producers = [
        threading.Thread(target=_produce_acks_1, args=(srv.url, f"http{i}", 80, acked, errors)) for i in range(3)
    ]
    for p in producers:
        p.start()

    catalog = Catalog(load_config(environ={}, overrides={"logstore.root": str(srv.root)}))
    sink = TopicWriter(catalog, "t", join=True)  # what the Spark sink commits with
    for i in range(30):
        values = [f"sink-{i}-{k}".encode() for k in range(4)]
        batch = input_table(pa.array([k % 2 for k in range(4)], pa.int32()), values)
        assert isinstance(sink.append([ProducerBatch(batch)])[0], AppendResult)
    sink.close()
    cli = subprocess.run(
        [*LOGSTORE, "--root", str(srv.root), "produce", "t", "--partition", "1"],
        input=b"".join(f"cli-{i}\n".encode() for i in range(20)),
        capture_output=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr.decode()
    for p in producers:
        p.join(timeout=120)
    assert not errors, errors[:3]
    # Commit order is submit order: once an acks=all batch is answered, every promised one is in Delta.
    # Neither the sink nor `logstore produce --root` fenced the running node: it still commits.
    with srv.client() as c:
        r = c.post("/v1/topics/t/records", params={"acks": "all"}, json={"records": [{"value": "after"}]})
        assert r.status_code == 200, r.text
        metrics = c.get("/metrics").text
    assert 'logstore_acks1_batches_total{offsets="promised",topic="t"}' in metrics  # not all waited for commits

    values = assert_gap_free(catalog, "t")
    stored = {v: (part, off) for part, vs in values.items() for off, v in enumerate(vs)}
    assert len(stored) == sum(len(vs) for vs in values.values())  # no duplicates
    assert len(acked) == 3 * 80 * 5
    misplaced = [(v, where, stored.get(v)) for v, where in acked.items() if stored.get(v) != where]
    assert misplaced == []
    assert sum(v.startswith(b"sink-") for v in stored) == 120
    assert sum(v.startswith(b"cli-") for v in stored) == 20


def test_a_killed_nodes_promises_are_replayed_before_another_writer_commits(server: Callable[..., Server]) -> None:
    # A long linger keeps the promised records out of Delta: only the node's WAL has them.
    srv = server(**{"linger.ms": 60000, "batch.size": 100_000_000})
    c = srv.client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
    r = c.post("/v1/topics/t/records", params={"acks": "1"}, json={"records": [{"value": f"v{i}"} for i in range(5)]})
    assert [o["offset"] for o in r.json()["offsets"]] == [0, 1, 2, 3, 4]
    srv.kill()

    catalog = Catalog(load_config(environ={}, overrides={"logstore.root": str(srv.root)}))
    sink = TopicWriter(catalog, "t", join=True)
    result = sink.append([ProducerBatch(input_table([0, 0], [b"sink0", b"sink1"]))])[0]
    assert isinstance(result, AppendResult) and result.offsets.to_pylist() == [5, 6]
    sink.close()
    assert assert_gap_free(catalog, "t") == {0: [b"v0", b"v1", b"v2", b"v3", b"v4", b"sink0", b"sink1"]}

    srv.restart()  # the node's own replay finds its frames committed: nothing twice
    got = srv.client().get("/v1/topics/t/partitions/0/records", params={"offset": 0}).json()
    assert [x["value"] for x in got["records"]] == ["v0", "v1", "v2", "v3", "v4", "sink0", "sink1"]


def test_a_node_fenced_by_a_new_leader_commits_its_promises_first(server: Callable[..., Server]) -> None:
    srv = server(**{"linger.ms": 60000, "batch.size": 100_000_000})
    c = srv.client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
    r = c.post("/v1/topics/t/records", params={"acks": "1"}, json={"records": [{"value": f"v{i}"} for i in range(3)]})
    assert [o["offset"] for o in r.json()["offsets"]] == [0, 1, 2]

    catalog = Catalog(load_config(environ={}, overrides={"logstore.root": str(srv.root)}))
    leader = TopicWriter(catalog, "t")  # claims the next epoch: the node is fenced from now on
    result = leader.append([ProducerBatch(input_table([0], [b"new"]))])[0]
    assert isinstance(result, AppendResult) and result.offsets.to_pylist() == [3]
    leader.close()
    assert assert_gap_free(catalog, "t") == {0: [b"v0", b"v1", b"v2", b"new"]}
    r = c.post("/v1/topics/t/records", params={"acks": "1"}, json={"records": [{"value": "late"}]})
    assert r.status_code == 503 and r.json()["error_code"] == "NOT_LEADER_OR_FOLLOWER", r.text


def test_promises_of_a_deleted_topic_never_reach_the_topic_created_again_under_its_name(
    server: Callable[..., Server],
) -> None:
    srv = server(**{"linger.ms": 60000, "batch.size": 100_000_000})
    c = srv.client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
    r = c.post("/v1/topics/t/records", params={"acks": "1"}, json={"records": [{"value": f"old{i}"} for i in range(5)]})
    assert [o["offset"] for o in r.json()["offsets"]] == [0, 1, 2, 3, 4]
    srv.kill()  # the promised records are in the node's write-ahead log only

    catalog = Catalog(load_config(environ={}, overrides={"logstore.root": str(srv.root)}))
    catalog.delete_topic("t")
    catalog.create_topic("t", 1)  # another topic under the same name, with an ID of its own
    srv.restart()  # its replay must not put the deleted topic's records into the new one
    r = srv.client().post("/v1/topics/t/records", params={"acks": "1"}, json={"records": [{"value": "new"}]})
    assert r.status_code == 200 and r.json()["offsets"] == [{"partition": 0, "offset": 0}], r.text
    assert srv.stop() in (0, -15)  # drains (uvicorn re-raises SIGTERM after its graceful shutdown)
    assert assert_gap_free(catalog, "t") == {0: [b"new"]}
