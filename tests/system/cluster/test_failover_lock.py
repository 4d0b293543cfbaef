"""The topic's failover lock in ZooKeeper (:meth:`~logstore.node.membership.ClusterMembership.failover_lock`).

One node at a time replays departed nodes' write-ahead logs and claims partitions of a topic. Another node waiting
for the lock gets a clear, retriable error after the session timeout; a holder that is paused (SIGSTOP) lets go
with its ZooKeeper session, so it blocks the others for about one session timeout, not for as long as it is
stopped (an ``flock`` of a stopped process is held for good). The lock lives in ZooKeeper, so it is the same on a
shared directory and on an object-store root.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from logstore.cluster import FAILOVER_LOCKS
from logstore.errors import KafkaStorageError
from logstore.node.membership import ClusterMembership
from tests.system.cluster.cluster_helpers import node_config

pytestmark = pytest.mark.zookeeper

SESSION_MS = 2000
"""Short sessions (ZooKeeper grants 1 to 10 s with the fixture's tick of 500 ms): a paused holder expires soon."""

_HOLDER = """
import sys, time
from logstore.config import load_config
from logstore.node.membership import ClusterMembership
overrides = {"logstore.root": sys.argv[1], "zookeeper.connect": sys.argv[2], "node.id": "1",
             "zookeeper.session.timeout.ms": sys.argv[3]}
node = ClusterMembership(load_config(environ={}, path=None, overrides=overrides), on_change=lambda _m: None,
                         on_session=lambda _c: None)
node.start()
with node.failover_lock("orders"):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def holder(chroot: str, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Node 1, in a process of its own, holding the failover lock of topic ``orders``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path / "data"), chroot, str(SESSION_MS)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def node(chroot: str, tmp_path: Path) -> Iterator[ClusterMembership]:
    membership = ClusterMembership(
        node_config(tmp_path / "data", chroot, node_id=2, session_ms=SESSION_MS),
        on_change=lambda _m: None,
        on_session=lambda _c: None,
    )
    membership.start()
    yield membership
    membership.close()


def test_a_paused_holder_of_the_failover_lock_lets_go_with_its_session(
    holder: subprocess.Popen[str], node: ClusterMembership
) -> None:
    started = time.monotonic()
    refused = r"topic orders: the failover lock in ZooKeeper \(/failover/orders\) was not free within"
    with pytest.raises(KafkaStorageError, match=refused), node.failover_lock("orders"):
        pass
    assert time.monotonic() - started >= SESSION_MS / 1000 * 0.9  # it waited for the lock, about one session

    holder.send_signal(signal.SIGSTOP)  # paused holding the lock: its session expires, its znode goes
    stopped = time.monotonic()
    deadline = stopped + 4 * SESSION_MS / 1000
    while True:  # as the committer does: try again on a later turn
        try:
            with node.failover_lock("orders"):
                taken_after = time.monotonic() - stopped
            break
        except KafkaStorageError:
            assert time.monotonic() < deadline, "the paused holder kept the failover lock past its session"
    print(f"\nfailover lock taken {taken_after:.2f}s after its holder was stopped (session {SESSION_MS} ms)")
    assert holder.poll() is None, "the holder is still there, stopped"


def _exists(chroot: str, path: str) -> bool:
    zk = KazooClient(hosts=chroot)
    zk.start(timeout=10)
    try:
        return zk.exists(path) is not None
    finally:
        zk.stop()
        zk.close()


def test_a_deleted_topic_takes_its_free_failover_lock_with_it(node: ClusterMembership, chroot: str) -> None:
    node.register_topic("orders", 2)
    with node.failover_lock("orders"):
        pass
    assert _exists(chroot, f"{FAILOVER_LOCKS}/orders")  # the lock's parent outlives its holders

    node.unregister_topic("orders")

    assert not _exists(chroot, f"{FAILOVER_LOCKS}/orders"), "a deleted topic left its failover lock in ZooKeeper"
    with node.failover_lock("orders"):  # a topic created again under the name takes it afresh
        pass


def test_deleting_a_topic_leaves_a_held_failover_lock_to_its_holder(
    holder: subprocess.Popen[str], node: ClusterMembership, chroot: str
) -> None:
    node.register_topic("orders", 2)

    node.unregister_topic("orders")  # node 1 is replaying the topic: its lock stays, and deleting does not fail

    assert _exists(chroot, f"{FAILOVER_LOCKS}/orders")
    with pytest.raises(KafkaStorageError, match="was not free within"), node.failover_lock("orders"):
        pass
