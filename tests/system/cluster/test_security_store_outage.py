"""The security store over a ZooKeeper outage: a key added once ZooKeeper is back reaches every node soon.

Each node's security store is a ZooKeeper client of its own. kazoo's reconnect backoff doubles while ZooKeeper is
away (up to a minute), so after an outage of a few seconds a node could go on refusing a key added elsewhere for
seconds after ZooKeeper returned (the nemesis saw 5 s). Its clients try again at least every half second
(:data:`logstore.cluster.connect.RECONNECT`).
"""

from __future__ import annotations

import time

import pytest

from logstore.cluster.security_store import ZooKeeperSecurityStore
from logstore.cluster.zookeeper_server import ZooKeeperServer
from logstore.security import new_key

pytestmark = pytest.mark.zookeeper

OUTAGE_S = 12.0
"""Long enough for kazoo's own backoff to reach several seconds between attempts."""


def test_a_key_added_after_an_outage_reaches_a_store_within_a_few_seconds(own_zookeeper: ZooKeeperServer) -> None:
    zk = own_zookeeper
    proc = zk.spawn()
    try:
        zk.wait_serving(proc)
        connect = f"{zk.connect}/outage"
        with ZooKeeperSecurityStore(connect) as node:
            proc.kill()
            proc.wait()
            time.sleep(OUTAGE_S)  # the outage itself, not a synchronisation
            proc = zk.spawn()
            zk.wait_serving(proc)
            back = time.monotonic()
            with ZooKeeperSecurityStore(connect) as admin:  # a fresh client: where the key is added
                record, _secret = new_key("User:alice")
                admin.add_key(record)
            deadline = back + 30
            while record.key_id not in node.snapshot().keys:
                assert time.monotonic() < deadline, "the store never saw the key"
                time.sleep(0.05)
            took = time.monotonic() - back
            print(f"\nkey seen {took:.1f}s after ZooKeeper was back")
            assert took <= 3.0, f"the store saw a key added after the outage only {took:.1f}s after ZooKeeper returned"
    finally:
        proc.kill()
        proc.wait()
