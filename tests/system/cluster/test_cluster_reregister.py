"""A leader whose ZooKeeper session expired keeps its acks=1 promises: it registers again only once they are answered.

A new leader of a departed node's partitions replays the write-ahead logs of the nodes not registered in ZooKeeper,
then claims the partitions, which fences the old leader's later commits (docs/cluster.md, failover). A node cut
from ZooKeeper (or paused) past its session timeout still holds acks=1 batches it answered with promised offsets
before their commit. Had it registered again as soon as its new session opened, a new leader reading the registry
during its claim would count it live and skip its log, then fence its commit of those batches: acknowledged
records lost. So it registers again only once every batch it promised is answered — committed, or failed by a
fence whose claimer replayed its frames, having found it unregistered.

The test makes that race certain, with real parts: node 0 reaches ZooKeeper through a TCP proxy that the test
cuts, and its committer is stalled by a task that occupies its only committer thread (``num.io.threads=1``), so
its promised records stay uncommitted; the test expires its session the ZooKeeper way (a second client with its
session id and password closes the session), holds the topic's failover lock so that node 1 cannot claim the
partition until node 0 either registered again or is waiting to, then lets node 1 claim it and node 0 commit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from bench._proxy import CuttableProxy
from ingest_api.forwarding import produce_here
from logstore.config import load_config
from logstore.log.catalog import Catalog
from logstore.node.broker import Broker
from logstore.node.membership import FAILOVER_LOCKS
from logstore.wire.json_produce import parse_produce
from tests.support.helpers import assert_gap_free
from tests.system.cluster.cluster_helpers import leaders, node_config, until

pytestmark = pytest.mark.zookeeper

TOPIC = "t"
FIXED_LEADERS = {"auto.leader.rebalance.enable": "false"}
"""No preferred-leader election: partition 0 moves only because node 0's session expired."""


@pytest.fixture
def proxy(zookeeper: str) -> Iterator[CuttableProxy]:
    """A TCP proxy to the session's ZooKeeper server, which the test cuts (node 0 reaches ZooKeeper through it)."""
    host, _, port = zookeeper.partition(":")
    cuttable = CuttableProxy((host, int(port)), name="zookeeper-proxy")
    yield cuttable
    cuttable.close()


def _expire(zookeeper: str, session: tuple[int, bytes]) -> None:
    """End the ZooKeeper session ``(session id, password)`` as its expiry does: its ephemeral znodes go."""
    other = KazooClient(hosts=zookeeper, client_id=session)
    other.start(timeout=10)
    other.stop()  # closes the session
    other.close()


def _live(node: Broker) -> set[int]:
    """The node ids ``node``'s view of the cluster counts live (registered)."""
    assert node.cluster is not None
    return {n.node_id for n in node.cluster.metadata().nodes}


def _acks1(node: Broker, value: str) -> int:
    """Produce one record to partition 0 with acks=1 through ``node``'s own produce path; the offset answered."""
    parsed = parse_produce(json.dumps({"records": [{"value": value, "partition": 0}]}).encode())
    _partitions, offsets = asyncio.run(asyncio.wait_for(produce_here(node, TOPIC, parsed, "1"), 10))
    return int(offsets[0])


def test_a_leader_whose_session_expired_registers_again_only_once_its_acks1_promises_are_answered(
    zookeeper: str, chroot: str, zk: KazooClient, proxy: CuttableProxy, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="logstore.cluster")
    root = tmp_path / "data"
    through_proxy = proxy.address + chroot.removeprefix(zookeeper)
    a = Broker(node_config(root, through_proxy, node_id=0, **{"num.io.threads": "1"}, **FIXED_LEADERS))
    b = Broker(node_config(root, chroot, node_id=1, **FIXED_LEADERS))
    stalled, resume = threading.Event(), threading.Event()
    try:
        a.start()
        a.store.create_topic(TOPIC, 1)
        pipeline = a.pipeline(TOPIC)
        until(lambda: pipeline.led == frozenset({0}))  # node 0, alone, leads and has claimed partition 0
        b.start()
        until(lambda: _live(a) == {0, 1})

        def stall() -> None:  # occupies node 0's only committer thread: nothing of it commits until resumed
            stalled.set()
            resume.wait(120)

        a.committers.task(stall, "stall").run_soon()
        assert stalled.wait(10)
        acked = {name: _acks1(a, name) for name in ("a0", "a1", "a2")}
        catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": str(root)}))
        assert acked == {"a0": 0, "a1": 1, "a2": 2}
        assert assert_gap_free(catalog, TOPIC).get(0, []) == [], "promised, not committed yet"

        lock = zk.Lock(f"{FAILOVER_LOCKS}/{TOPIC}", "test")
        assert lock.acquire(timeout=30)
        try:
            assert a.cluster is not None
            session = a.cluster.coordinator._zk.client_id
            proxy.cut()  # node 0 cannot reach ZooKeeper, so it cannot register again before its partition moves
            _expire(zookeeper, session)
            until(lambda: leaders(zk, TOPIC, 1).get(0, (-1, 0))[0] == 1, timeout_s=30)  # node 1 leads, not claimed
            proxy.heal()
            # Node 0's new session: registered again (node 1 would count it live and skip its log), or waiting.
            waiting = "not registering again in the new ZooKeeper session"
            until(lambda: 0 in _live(b) or waiting in caplog.text, timeout_s=60)
        finally:
            lock.release()
        until(lambda: (p := b.pipeline_if_open(TOPIC)) is not None and p.led == frozenset({0}), timeout_s=60)
        resume.set()  # node 0 commits what it promised now: its claim fenced, or replayed by node 1
        until(lambda: 0 in _live(b), timeout_s=60)  # then it registers again

        log = [v.decode() for v in assert_gap_free(catalog, TOPIC).get(0, [])]
        assert {name: log.index(name) if name in log else None for name in acked} == acked, log
        assert len(log) == len(acked), log
    finally:
        resume.set()
        a.close()
        b.close()
