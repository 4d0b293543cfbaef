"""A real ``logstore serve`` on both roots: topics, acks=all and acks=1 produce, fetch and group offsets over HTTP.

On an ``s3://`` root the node's commits, reads, ``_offsets`` and its acks=1 write-ahead log all go to the bucket:
an acks=1 answer waits until its frames' object is stored, so a node killed before it committed them leaves
them for the next writer to replay.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import boto3
import httpx
import pytest

from logstore.storage import is_object_store
from tests.integration.ingest_api import test_acks1_promises as promise_tests
from tests.integration.ingest_api import test_api as api_tests
from tests.integration.ingest_api import test_wal as wal_tests
from tests.support.server import Server

StartServer = Callable[..., Server]


@pytest.fixture
def api(server: StartServer) -> httpx.Client:
    return server().client()


test_topics_lifecycle = api_tests.test_topics_lifecycle
test_a_killed_nodes_promises_are_replayed_before_another_writer_commits = (
    promise_tests.test_a_killed_nodes_promises_are_replayed_before_another_writer_commits
)
test_second_server_on_one_root_refuses_to_start_until_the_first_is_killed = (
    wal_tests.test_second_server_on_one_root_refuses_to_start_until_the_first_is_killed
)
test_produce_and_fetch_round_trip = api_tests.test_produce_and_fetch_round_trip
test_the_answer_names_each_records_partition_and_offset_in_request_order = (
    api_tests.test_the_answer_names_each_records_partition_and_offset_in_request_order
)


def test_commits_and_offsets_land_in_the_bucket(api: httpx.Client, root: str) -> None:
    assert api_tests.create(api, "t", 2)["root"] == (root if is_object_store(root) else str(Path(root).resolve()))
    r = api_tests.produce(api, "t", [{"value": f"v{i}", "partition": i % 2} for i in range(10)])
    assert r.status_code == 200, r.text
    got = api.get("/v1/topics/t/partitions/1/records", params={"offset": 0}).json()
    assert [rec["value"] for rec in got["records"]] == [f"v{i}" for i in range(1, 10, 2)]
    r = api.post("/v1/groups/g/offsets", json={"topic": "t", "partitions": {"1": 3}})
    assert r.status_code == 200, r.text
    want = {"partition": 1, "committed_offset": 3, "high_watermark": 5, "lag": 2}
    assert api.get("/v1/groups/g").json()["topics"] == [{"topic": "t", "partitions": [want]}]
    if is_object_store(root):  # nothing of the store went to a local folder: it is all in the bucket
        bucket, _, prefix = root.removeprefix("s3://").partition("/")
        keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]]
        assert f"{prefix}/topics/t/_delta_log/00000000000000000002.json" in keys
        assert any(k.startswith(f"{prefix}/_offsets/_delta_log/") for k in keys)
        assert f"{prefix}/_wal/node.id" in keys and f"{prefix}/_wal/node.lock" in keys
        assert any(k.startswith(f"{prefix}/topics/t/partition=1/") and k.endswith(".parquet") for k in keys)


def test_transactions_are_refused_on_an_object_root_and_served_on_a_disk(api: httpx.Client, root: str) -> None:
    r = api.post("/v1/transactions/tx-1/init", json={})
    if is_object_store(root):  # their state log and staging have no object-store form yet: refused, never local
        assert r.status_code >= 400 and r.json()["error_code"] == "UNSUPPORTED_VERSION", r.text
        assert "not served on an object-store logstore.root" in r.json()["message"]
    else:
        assert r.status_code == 200, r.text
