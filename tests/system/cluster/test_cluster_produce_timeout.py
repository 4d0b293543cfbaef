"""Cluster mode: a produce whose commit keeps failing at its leader is answered REQUEST_TIMED_OUT in time."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
from kazoo.client import KazooClient

from tests.support.server import Server
from tests.system.cluster.cluster_helpers import create_topic, produce, produce_ok


def test_acks_all_is_request_timed_out_while_storage_fails_and_committed_after(
    cluster: Callable[..., Server], zk: KazooClient
) -> None:
    node = cluster(1, **{"request.timeout.ms": 1500})
    create_topic(node, "b", zk, {1})
    produce_ok(node.url, "b", {"records": [{"value": "first", "partition": 0}]})  # the leader has claimed it
    blocker = node.root / "topics" / "b" / "partition=1"
    blocker.touch()  # a file where the partition's directory goes: every commit to it fails with a storage error
    try:
        r = produce(node.url, "b", {"records": [{"value": "v", "partition": 1}]})
    except httpx.TimeoutException:
        raise AssertionError("an acks=all produce whose commit keeps failing got no answer in 30 s") from None
    assert r.status_code == 408 and r.json()["error_code"] == "REQUEST_TIMED_OUT", r.text

    blocker.unlink()  # storage recovers: the record answered with the timeout is committed by the retry
    deadline = time.monotonic() + 30
    while not (
        got := httpx.get(f"{node.url}/v1/topics/b/partitions/1/records", params={"offset": 0}).json()["records"]
    ):
        assert time.monotonic() < deadline, "the queued record was not committed after storage recovered"
        time.sleep(0.1)
    assert [(x["offset"], x["value"]) for x in got] == [(0, "v")]
