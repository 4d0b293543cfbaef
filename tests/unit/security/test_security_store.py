"""The shared security store under <root>/_security/: atomic writes, serialized writers, changes seen by other nodes."""

from __future__ import annotations

import threading
from pathlib import Path

from logstore.security import (
    AclBinding,
    FileSecurityStore,
    Operation,
    PatternType,
    Permission,
    Quota,
    ResourceType,
    new_key,
)


def binding(i: int) -> AclBinding:
    return AclBinding(f"User:u{i}", ResourceType.TOPIC, "t", PatternType.LITERAL, Operation.READ, Permission.ALLOW)


def test_another_node_sees_a_change_once_it_rechecks(tmp_path: Path) -> None:
    writer = FileSecurityStore(str(tmp_path))
    reader = FileSecurityStore(str(tmp_path), refresh_s=3600)
    assert reader.snapshot().acls == ()
    writer.add_acls([binding(1)])
    assert writer.snapshot().acls == (binding(1),)  # a writer sees its own change at once
    assert reader.snapshot().acls == ()  # checked less than refresh_s ago: the cached view
    fresh = FileSecurityStore(str(tmp_path), refresh_s=0)
    assert fresh.snapshot().acls == (binding(1),)
    writer.remove_acls([binding(1)])
    assert fresh.snapshot().acls == ()


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    stores = [FileSecurityStore(str(tmp_path)) for _ in range(4)]  # as if four processes
    keys = [new_key(f"User:u{i}")[0] for i in range(8)]

    def work(i: int) -> None:
        stores[i % 4].add_acls([binding(i)])
        stores[i % 4].add_key(keys[i])
        stores[i % 4].set_quota(Quota(f"User:u{i}", producer_byte_rate=i + 1))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    state = FileSecurityStore(str(tmp_path)).snapshot()
    assert set(state.acls) == {binding(i) for i in range(8)}
    assert set(state.keys) == {k.key_id for k in keys}
    assert {q.producer_byte_rate for q in state.quotas.values()} == set(range(1, 9))
    names = sorted(p.name for p in (tmp_path / "_security").iterdir())
    assert names == [".lock", "acls.json", "keys.json", "quotas.json"]  # no temp files left behind


def test_a_quota_without_rates_is_removed(tmp_path: Path) -> None:
    store = FileSecurityStore(str(tmp_path))
    store.set_quota(Quota("User:a", producer_byte_rate=10))
    store.set_quota(Quota("User:a", "etl", consumer_byte_rate=20))
    store.set_quota(Quota("User:a"))
    assert list(store.snapshot().quotas) == [("User:a", "etl")]
