"""Keys, ACLs and quotas in ZooKeeper (cluster mode): shared by every store, changes never lost, seen at once."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

from logstore.cluster.security_store import ZooKeeperSecurityStore
from logstore.security import (
    AclBinding,
    Operation,
    PatternType,
    Permission,
    Quota,
    ResourceType,
    new_key,
)


def chroot(zookeeper: str) -> str:
    return f"{zookeeper}/t-{uuid.uuid4().hex[:8]}"


def acl(principal: str, topic: str) -> AclBinding:
    return AclBinding(principal, ResourceType.TOPIC, topic, PatternType.LITERAL, Operation.READ, Permission.ALLOW)


def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_a_change_on_one_store_reaches_another_within_a_round_trip(zookeeper: str) -> None:
    connect = chroot(zookeeper)
    with ZooKeeperSecurityStore(connect) as a, ZooKeeperSecurityStore(connect) as b:
        record, _key = new_key("User:alice")
        a.add_key(record)
        assert record.key_id in a.snapshot().keys  # its own change at once
        started = time.monotonic()
        assert wait_for(lambda: record.key_id in b.snapshot().keys)
        assert time.monotonic() - started < 1.0
        assert b.revoke_keys(principal="User:alice") == [record]
        assert wait_for(lambda: record.key_id not in a.snapshot().keys)
        a.set_quota(Quota("User:alice", None, producer_byte_rate=1024))
        assert wait_for(lambda: ("User:alice", None) in b.snapshot().quotas)


def test_concurrent_changes_from_many_stores_are_all_kept(zookeeper: str) -> None:
    """Compare-and-set: eight writers adding ACLs at once lose none, and each add reports only its own."""
    connect = chroot(zookeeper)
    stores = [ZooKeeperSecurityStore(connect) for _ in range(4)]
    reported: list[list[AclBinding]] = []
    lock = threading.Lock()

    def add(i: int) -> None:
        for j in range(10):
            got = stores[i % 4].add_acls([acl(f"User:u{i}", f"t{j}")])
            with lock:
                reported.append(got)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        expected = {acl(f"User:u{i}", f"t{j}") for i in range(8) for j in range(10)}
        assert all(len(r) == 1 for r in reported)  # a retried change does not report twice
        assert wait_for(lambda: all(set(s.snapshot().acls) == expected for s in stores))
    finally:
        for s in stores:
            s.close()


def test_a_new_store_starts_from_what_is_there(zookeeper: str) -> None:
    connect = chroot(zookeeper)
    with ZooKeeperSecurityStore(connect) as a:
        a.add_acls([acl("User:bob", "orders")])
        assert a.remove_acls([acl("User:bob", "missing")]) == []
    with ZooKeeperSecurityStore(connect) as b:
        assert b.snapshot().acls == (acl("User:bob", "orders"),)
