"""The failover lock over a ZooKeeper outage: its holder lets go within about a session of ZooKeeper's return.

A node that holds a topic's failover lock (replaying a departed node's log, claiming partitions) when its
ZooKeeper goes away keeps the topic's writer lock and a committer worker until the lock's release returns.
kazoo's release retries a lost connection with a backoff that doubles up to an hour, so it must not be left
to that: once ZooKeeper answers again the release is done within about one session timeout.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from logstore.cluster.zookeeper_server import ZooKeeperServer
from logstore.node.membership import ClusterMembership
from tests.system.cluster.cluster_helpers import node_config

pytestmark = pytest.mark.zookeeper

SESSION_MS = 4000
OUTAGE_S = 15.0
"""How long ZooKeeper is away: the outage itself (not a synchronisation), longer than a few retry delays."""


def test_the_failover_lock_is_let_go_soon_after_zookeeper_returns(
    own_zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    zk = own_zookeeper
    proc = zk.spawn()
    try:
        zk.wait_serving(proc)
        node = ClusterMembership(
            node_config(tmp_path / "data", zk.connect, session_ms=SESSION_MS),
            on_change=lambda _m: None,
            on_session=lambda _c: None,
        )
        node.start()
        held, leave, released = threading.Event(), threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def holder() -> None:
            try:
                with node.failover_lock("orders"):
                    held.set()
                    leave.wait()
            except BaseException as e:  # reported by the test
                errors.append(e)
            finally:
                released.set()

        t = threading.Thread(target=holder, daemon=True)
        t.start()
        assert held.wait(30)
        proc.kill()
        proc.wait()
        leave.set()  # the replay is done: the lock is let go while ZooKeeper is away
        outage_end = time.monotonic() + OUTAGE_S
        while time.monotonic() < outage_end and not released.is_set():
            released.wait(0.5)
        proc = zk.spawn()
        zk.wait_serving(proc)
        back = time.monotonic()
        released.wait(3 * SESSION_MS / 1000 + 60)
        took = time.monotonic() - back
        print(f"\nrelease returned {took:.1f}s after ZooKeeper was back; errors={errors!r}")
        assert released.is_set()
        assert took <= 2 * SESSION_MS / 1000, f"the failover lock was let go only {took:.1f}s after ZooKeeper returned"
        node.close()
    finally:
        proc.kill()
        proc.wait()
