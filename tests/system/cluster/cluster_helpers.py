"""Helpers of the cluster tests: partition states in ZooKeeper, polling, leader epochs in a topic's Delta log.

The fixtures that start nodes (``chroot``, ``zk``, ``cluster``) are in
``tests/system/cluster/conftest.py``; every node they start has ``SESSION_MS`` as its
``zookeeper.session.timeout.ms``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from kazoo.client import KazooClient

from logstore.config import LogstoreConfig, load_config
from logstore.storage import join, storage_for
from tests.support.server import Server

SESSION_MS = 4000
"""``zookeeper.session.timeout.ms`` of the test nodes: short, so failover tests run in seconds."""
PARTITIONS = 6


def node_config(
    root: Path | str, connect: str, node_id: int = 1, session_ms: int = SESSION_MS, **more: str
) -> LogstoreConfig:
    """The config of an in-process cluster node: ``root``, ZooKeeper at ``connect``, ``more`` keys, no file or
    variables."""
    overrides = {
        "logstore.root": str(root),
        "zookeeper.connect": connect,
        "node.id": str(node_id),
        "zookeeper.session.timeout.ms": str(session_ms),
        **more,
    }
    return load_config(environ={}, path=None, overrides=overrides)


def leaders(zk: KazooClient, topic: str, n: int) -> dict[int, tuple[int, int]]:
    """Partition → (leader node id, leader epoch), read from ZooKeeper."""
    out = {}
    for p in range(n):
        path = f"/brokers/topics/{topic}/partitions/{p}/state"
        if zk.exists(path):
            doc = json.loads(zk.get(path)[0])
            out[p] = (int(doc["leader"]), int(doc["leader_epoch"]))
    return out


def until(what: Callable[[], object], timeout_s: float = 30, step_s: float = 0.05) -> object:
    """Poll ``what`` until it returns something truthy (ZooKeeper watches are asynchronous)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = what()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(step_s)


def led_by(zk: KazooClient, topic: str, live: set[int]) -> dict[int, tuple[int, int]] | None:
    """The partition states when every partition of ``topic`` is led by a node of ``live``, else None."""
    state = leaders(zk, topic, PARTITIONS)
    ok = len(state) == PARTITIONS and all(leader in live for leader, _ in state.values())
    return state if ok else None


def create_topic(node: Server, topic: str, zk: KazooClient, live: set[int]) -> dict[int, tuple[int, int]]:
    """Create ``topic`` with ``PARTITIONS`` partitions through ``node``; its states once ``live`` leads them all.

    "Leads" as a client sees it: ZooKeeper names the leader *and* that leader has claimed the partition at that
    epoch in the topic's log, which it does just before it accepts records for it. Until then the leader answers
    a retriable NOT_LEADER_OR_FOLLOWER, as Kafka does while a leader is being elected.
    """
    r = httpx.post(f"{node.url}/v1/topics", json={"name": topic, "partitions": PARTITIONS}, timeout=30)
    assert r.status_code == 201, r.text

    def claimed() -> dict[int, tuple[int, int]] | None:
        state = led_by(zk, topic, live)
        if state is None:
            return None
        epochs = leader_epochs_in_log(node.root, topic)
        return state if all(epoch in epochs.get(p, ()) for p, (_, epoch) in state.items()) else None

    state = until(claimed)
    assert isinstance(state, dict)
    return state


def solo_topic_on_two_nodes(nodes: dict[int, Server], zk: KazooClient, topic: str = "solo") -> tuple[int, int]:
    """Create ``topic`` with one partition through node 1 of a two-node cluster; (its leader, the other node)
    once ZooKeeper names the leader."""
    r = httpx.post(f"{nodes[1].url}/v1/topics", json={"name": topic, "partitions": 1}, timeout=30)
    assert r.status_code == 201, r.text
    state = until(lambda: leaders(zk, topic, 1))
    assert isinstance(state, dict)
    leader = state[0][0]
    return leader, 2 if leader == 1 else 1


def leader_epochs_in_log(root: Path | str, topic: str) -> dict[int, list[int]]:
    """Per partition, the ``logstore.leader.<p>`` txn versions (leader epochs) of the topic's commits, in log order.

    ``root``: a directory or an object-store URI (read through :mod:`logstore.storage`).
    """
    log_dir = join(str(root), "topics", topic, "_delta_log")
    storage = storage_for(log_dir)
    out: dict[int, list[int]] = {}
    for name in (n for n in storage.list_names(log_dir) if n.endswith(".json")):
        for line in storage.read(join(log_dir, name)).decode().splitlines():
            action = json.loads(line) if line.strip() else {}
            app = action.get("txn", {}).get("appId", "")
            if app.startswith("logstore.leader."):
                out.setdefault(int(app.removeprefix("logstore.leader.")), []).append(action["txn"]["version"])
    return out


def produce(url: str, topic: str, body: dict[str, object], acks: str = "all", **params: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/topics/{topic}/records", params={"acks": acks, **params}, json=body, timeout=30)


def produce_ok(url: str, topic: str, body: dict[str, object], acks: str = "all") -> list[dict[str, int]]:
    """Produce, retrying a retriable refusal (a leader still claiming its partitions) until it is accepted."""

    def attempt() -> list[dict[str, int]] | None:
        r = produce(url, topic, body, acks)
        if r.status_code == 200:
            return list(r.json()["offsets"])
        assert r.status_code == 503, r.text
        return None

    result = until(attempt)
    assert isinstance(result, list)
    return result
